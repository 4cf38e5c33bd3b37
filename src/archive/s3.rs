//! One S3-compatible bucket: each request presigned with `rusty-s3` (AWS Signature V4 in the
//! query string, for the time the caller gives), sent with hyper on one kept connection
//! (rustls for `https`, the same client code as single sign-on's, `oidc::fetch::send`),
//! within a time ceiling that grows with its body, its answer read within a byte ceiling and
//! S3's XML read by `xml.rs`.
//!
//! Why `rusty-s3`: it only signs (sans-IO: no HTTP client, no runtime of its own), on
//! aws-lc-rs, which rustls already brings, so on a 1 GiB board it costs a few hundred KiB of
//! code; an AWS SDK brings its own HTTP stack and credential chain. Its XML parsers are not
//! used: they want fields some servers leave out of lists, and every XML the box reads has
//! a node ceiling.
//!
//! The payload is not signed (`UNSIGNED-PAYLOAD`, as presigned requests are): what the server
//! stores is checked by the body's own checksums instead. A recording sent whole goes as it
//! is read from its file ([`Bucket::put_file`]) with its CRC-32 (`x-amz-checksum-crc32`),
//! which the server checks before it stores it and must send back: a CRC-32 costs a read of
//! the file, where an MD5 or a SHA-256 costs the box and the server as much CPU as the
//! sending itself. Other objects go with `Content-MD5`
//! and `x-amz-checksum-sha256`, which the server checks before it answers, and the answer
//! must confirm one of them (its ETag is the MD5 of a plain object, and a server that
//! checked the SHA-256 returns it); a part goes with its `Content-MD5` and its ETag must be
//! that MD5; a completed upload's ETag must be the MD5 of its parts' MD5s, `-` their count.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use bytes::Bytes;
use http_body_util::{BodyExt, Limited};
use md5::Digest as _;
use rusty_s3::Method;
use tracing::warn;

use super::xml::{self, Page};
use crate::limits;
use crate::oidc::fetch::{Chunks, FetchError, Kept};

/// Where a target's objects go (the config's fields, checked).
#[derive(Clone, PartialEq, Eq)]
pub struct Place {
    /// `http` or `https`, a host and a port, no path.
    pub endpoint: url::Url,
    pub region: String,
    pub bucket: String,
    /// `https://endpoint/bucket/key` rather than `https://bucket.endpoint/key`.
    pub path_style: bool,
    pub access_key: String,
    pub secret_key: String,
    /// The server's CA (PEM), when it is not one of the public roots.
    pub ca_pem: Option<String>,
}

impl std::fmt::Debug for Place {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Place")
            .field("endpoint", &self.endpoint.as_str())
            .field("bucket", &self.bucket)
            .field("access_key", &self.access_key)
            .finish_non_exhaustive()
    }
}

/// Why a request failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum S3Error {
    /// The exchange itself: unreachable, no answer in time, TLS, an answer over its ceiling,
    /// broken off.
    #[error("{0}")]
    Exchange(#[from] FetchError),
    /// The server refuses the box's time: the box's clock is `off_s` seconds ahead of the
    /// server's `Date` (behind when negative).
    #[error("the box's clock is {off_s} s ahead of the server's (behind if negative), which refuses its signatures")]
    Clock { off_s: i64 },
    #[error("it refused: HTTP {status} {code}{}", said(.message))]
    Refused { status: u16, code: String, message: String },
    #[error("its answer makes no sense: {0}")]
    BadAnswer(String),
    #[error("it did not confirm the bytes sent: {0}")]
    Checksum(String),
}

fn said(message: &str) -> String {
    if message.is_empty() { String::new() } else { format!(": {message}") }
}

/// What a failure means for what the box does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The network, the server busy or down, a broken answer: try again later.
    Later,
    /// The keys are wrong or lack the right: nothing goes until the admin changes them.
    Credentials,
    /// The box's clock is off: nothing goes until it is right.
    Clock,
    /// The bucket or the server is full.
    Full,
    /// The object or the upload is not there.
    Missing,
    /// Refused for a reason of its own (no such bucket, a bad request).
    Refused,
}

impl S3Error {
    pub fn kind(&self) -> Kind {
        match self {
            S3Error::Clock { .. } => Kind::Clock,
            S3Error::Refused { status, code, .. } => match code.as_str() {
                "InvalidAccessKeyId" | "SignatureDoesNotMatch" | "AccessDenied" | "InvalidToken" | "ExpiredToken" => {
                    Kind::Credentials
                }
                "QuotaExceeded" | "StorageFull" | "XMinioStorageFull" | "InsufficientStorage" => Kind::Full,
                "NoSuchKey" | "NoSuchUpload" => Kind::Missing,
                "SlowDown" | "ServiceUnavailable" | "InternalError" | "RequestTimeout" => Kind::Later,
                _ if *status == 507 => Kind::Full,
                _ if *status >= 500 || *status == 429 || *status == 408 => Kind::Later,
                _ if *status == 404 && code != "NoSuchBucket" => Kind::Missing,
                _ if *status == 403 => Kind::Credentials,
                _ => Kind::Refused,
            },
            _ => Kind::Later,
        }
    }
}

/// A successful answer.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub headers: http::HeaderMap,
    pub body: Bytes,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// The ETag without its quotes.
    pub fn etag(&self) -> Option<&str> {
        self.header("etag").map(|e| e.trim_matches('"'))
    }
}

/// One request before it is signed.
struct Ask<'a> {
    method: Method,
    /// The object's key; empty for the bucket itself.
    key: &'a str,
    query: Vec<(&'static str, String)>,
    /// Sent and signed; names in lower case.
    headers: Vec<(&'static str, String)>,
    body: Bytes,
    /// Sent instead of `body`: the first bytes of a file, as many as said.
    file: Option<(PathBuf, u64)>,
    answer_max_bytes: usize,
}

impl<'a> Ask<'a> {
    /// The object's type, from its key's ending, for whoever reads the bucket.
    fn typed(&mut self) {
        let ending = self.key.rsplit('.').next().unwrap_or("");
        let kind = match ending {
            "mp4" => "video/mp4",
            "json" => "application/json",
            "jpg" => "image/jpeg",
            _ => return,
        };
        self.headers.push(("content-type", kind.to_string()));
    }

    fn new(method: Method, key: &'a str) -> Ask<'a> {
        Ask {
            method,
            key,
            query: Vec::new(),
            headers: Vec::new(),
            body: Bytes::new(),
            file: None,
            answer_max_bytes: limits::ARCHIVE_ANSWER_MAX_BYTES,
        }
    }
}

/// The MD5 of `bytes`, as S3's ETags spell it.
/// `f` of `body` on the blocking pool: a digest of a part's 8 MiB takes tens of ms on a board,
/// too long to hold a runtime thread.
pub async fn off_runtime<T: Send + 'static>(body: Bytes, f: impl FnOnce(&[u8]) -> T + Send + 'static) -> T {
    match tokio::task::spawn_blocking(move || f(&body)).await {
        Ok(v) => v,
        Err(e) => std::panic::resume_unwind(e.into_panic()),
    }
}

pub fn md5_hex(bytes: &[u8]) -> String {
    hex(&md5::Md5::digest(bytes))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).ok()).collect()
}

/// What a completed upload's ETag is when its parts' ETags (their MD5s) are `parts`.
pub fn multipart_etag(parts: &[String]) -> Option<String> {
    let mut all = Vec::with_capacity(parts.len() * 16);
    for p in parts {
        all.extend(unhex(p.trim_matches('"')).filter(|b| b.len() == 16)?);
    }
    Some(format!("{}-{}", md5_hex(&all), parts.len()))
}

/// The first `len` bytes of the file at `path` as a request body, read on the blocking pool
/// [`limits::ARCHIVE_STREAM_CHUNK_BYTES`] at a time, at most
/// [`limits::ARCHIVE_STREAM_CHUNKS_AHEAD`] chunks ahead of the connection; the reading stops
/// when the request is dropped. A file shorter than `len` ends the body with an error.
fn file_chunks(path: PathBuf, len: u64) -> Chunks {
    let (tx, rx) = tokio::sync::mpsc::channel(limits::ARCHIVE_STREAM_CHUNKS_AHEAD);
    tokio::task::spawn_blocking(move || {
        use std::io::Read;
        let mut file = match std::fs::File::open(&path) {
            Ok(f) => f,
            Err(e) => {
                let _ = tx.blocking_send(Err(e));
                return;
            }
        };
        let mut left = len;
        while left > 0 {
            let mut chunk = vec![0; left.min(limits::ARCHIVE_STREAM_CHUNK_BYTES as u64) as usize];
            let read = file.read_exact(&mut chunk).map(|()| Bytes::from(chunk));
            left -= read.as_ref().map_or(0, |c| c.len() as u64);
            let failed = read.is_err();
            if tx.blocking_send(read).is_err() || failed {
                return;
            }
        }
    });
    Chunks::new(rx, len)
}

/// A bucket the box talks to.
pub struct Bucket {
    bucket: rusty_s3::Bucket,
    place: Place,
    tls: Arc<rustls::ClientConfig>,
    kept: Kept,
    /// Until the server answers a [`Bucket::put_file`] without the CRC-32 it was given.
    confirms_crc32: AtomicBool,
}

impl Bucket {
    pub fn new(place: Place) -> Result<Bucket, String> {
        let style = if place.path_style { rusty_s3::UrlStyle::Path } else { rusty_s3::UrlStyle::VirtualHost };
        let bucket = rusty_s3::Bucket::new(place.endpoint.clone(), style, place.bucket.clone(), place.region.clone())
            .map_err(|e| format!("the bucket's address: {e}"))?;
        let tls = crate::oidc::fetch::trust(place.ca_pem.as_deref())?;
        Ok(Bucket { bucket, place, tls, kept: Kept::default(), confirms_crc32: AtomicBool::new(true) })
    }

    /// False once the server has stored an object sent with its CRC-32 without sending that
    /// back: it does not check it, so objects go to it with their MD5.
    pub fn confirms_crc32(&self) -> bool {
        self.confirms_crc32.load(Ordering::Relaxed)
    }

    /// Signs `ask` for the box's time `now_us` (UTC µs) and sends it.
    async fn send(&self, ask: Ask<'_>, now_us: i64) -> Result<Answer, S3Error> {
        let len = ask.file.as_ref().map_or(ask.body.len() as u64, |(_, len)| *len);
        let body_ms = len * 1_000 / limits::ARCHIVE_SLOWEST_BYTES_PER_S;
        let timeout_ms = limits::ARCHIVE_REQUEST_TIMEOUT_MS + body_ms;
        match tokio::time::timeout(Duration::from_millis(timeout_ms), self.exchange(ask, now_us)).await {
            Ok(r) => r,
            Err(_) => Err(FetchError::Timeout(timeout_ms).into()),
        }
    }

    async fn exchange(&self, mut ask: Ask<'_>, now_us: i64) -> Result<Answer, S3Error> {
        let url = if ask.key.is_empty() { self.bucket.base_url().clone() } else { self.bucket.object_url(ask.key) };
        let now = jiff::Timestamp::from_microsecond(now_us)
            .map_err(|e| FetchError::Broken(format!("the box's time: {e}")))?;
        ask.query.sort();
        ask.headers.sort();
        let signed = rusty_s3::signing::sign(
            &now,
            ask.method,
            url,
            &self.place.access_key,
            &self.place.secret_key,
            None,
            self.bucket.region(),
            limits::ARCHIVE_SIGNATURE_EXPIRES_S,
            ask.query.iter().map(|(k, v)| (*k, v.as_str())),
            ask.headers.iter().map(|(k, v)| (*k, v.as_str())),
        );
        let path = &signed[url::Position::BeforePath..url::Position::AfterQuery];
        let authority = &signed[url::Position::BeforeHost..url::Position::AfterPort];
        let mut request = http::Request::builder()
            .method(ask.method.to_str())
            .uri(path)
            .header(http::header::HOST, authority)
            .header(http::header::USER_AGENT, concat!("KeepPeek/", env!("CARGO_PKG_VERSION")));
        for (name, value) in &ask.headers {
            request = request.header(*name, value.as_str());
        }
        let body = match ask.file.take() {
            None => crate::oidc::fetch::whole(ask.body),
            Some((path, len)) => {
                request = request.header(http::header::CONTENT_LENGTH, len);
                http_body_util::Either::Right(file_chunks(path, len))
            }
        };
        let request = request.body(body).map_err(|e| S3Error::from(FetchError::Broken(e.to_string())))?;
        let (origin, sender, response) = crate::oidc::fetch::send(&self.tls, &self.kept, &signed, request).await?;
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let max = ask.answer_max_bytes;
        let body = Limited::new(response.into_body(), max).collect().await.map_err(|e| {
            if e.is::<http_body_util::LengthLimitError>() {
                S3Error::from(FetchError::TooLarge(max))
            } else {
                S3Error::from(FetchError::Broken(e.to_string()))
            }
        })?;
        self.kept.put(origin, sender);
        let clock_off_s = headers
            .get(http::header::DATE)
            .and_then(|d| d.to_str().ok())
            .and_then(|d| httpdate::parse_http_date(d).ok())
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map(|d| now_us.div_euclid(1_000_000) - d.as_secs() as i64);
        let answer = Answer { status, headers, body: body.to_bytes() };
        if (200..300).contains(&status) {
            return Ok(answer);
        }
        let text = String::from_utf8_lossy(&answer.body);
        let (code, message) = xml::error(&text).unwrap_or_else(|| (String::new(), String::new()));
        let off = clock_off_s.filter(|off| off.abs() > limits::ARCHIVE_CLOCK_SKEW_MAX_S);
        // A server checks the time a request was signed at before its signature: a box whose
        // clock is off gets a refusal that is about its clock, though some say only that the
        // request expired or was denied.
        match (code.as_str(), off) {
            ("RequestTimeTooSkewed", _) => Err(S3Error::Clock { off_s: off.or(clock_off_s).unwrap_or(0) }),
            (_, Some(off_s)) if status == 403 => Err(S3Error::Clock { off_s }),
            _ => Err(S3Error::Refused { status, code, message }),
        }
    }

    /// Stores `body` as `key` whole; its ETag.
    pub async fn put(&self, key: &str, body: Bytes, now_us: i64) -> Result<String, S3Error> {
        // The two digests side by side, each on a thread of the blocking pool.
        let (md5, sha) = tokio::join!(
            off_runtime(body.clone(), |b| md5::Md5::digest(b)),
            off_runtime(body.clone(), |b| B64.encode(sha2::Sha256::digest(b)))
        );
        let mut ask = Ask::new(Method::Put, key);
        ask.headers.push(("content-md5", B64.encode(md5)));
        ask.headers.push(("x-amz-checksum-sha256", sha.clone()));
        ask.typed();
        ask.body = body;
        let answer = self.send(ask, now_us).await?;
        let etag = answer.etag().unwrap_or("").to_string();
        let etag_is_md5 = unhex(&etag).is_some_and(|b| b.len() == 16);
        let sha_back = answer.header("x-amz-checksum-sha256");
        if etag_is_md5 && etag != hex(&md5) {
            return Err(S3Error::Checksum(format!("{key}: ETag {etag}, sent MD5 {}", hex(&md5))));
        }
        if sha_back.is_some_and(|s| s != sha) {
            return Err(S3Error::Checksum(format!("{key}: SHA-256 {}, sent {sha}", sha_back.unwrap_or(""))));
        }
        if !etag_is_md5 && sha_back.is_none() {
            return Err(S3Error::Checksum(format!("{key}: neither its MD5 nor its SHA-256 came back")));
        }
        Ok(etag)
    }

    /// Stores the first `len` bytes of the file at `path` as `key` in one request, read as
    /// they are sent, so memory holds a few chunks of it whatever its size; its ETag. It goes
    /// with `crc32`, its CRC-32 (made by a read before), which the server checks before it
    /// stores it and must send back. A server that does not is not trusted with it again
    /// ([`Bucket::confirms_crc32`]): that object is a checksum error, sent again by the
    /// caller with its MD5.
    pub async fn put_file(
        &self,
        key: &str,
        (path, len): (PathBuf, u64),
        crc32: u32,
        now_us: i64,
    ) -> Result<String, S3Error> {
        let sum = B64.encode(crc32.to_be_bytes());
        let mut ask = Ask::new(Method::Put, key);
        ask.headers.push(("x-amz-checksum-crc32", sum.clone()));
        ask.typed();
        ask.file = Some((path, len));
        let answer = self.send(ask, now_us).await?;
        let etag = answer.etag().filter(|e| !e.is_empty()).map(str::to_string);
        match (answer.header("x-amz-checksum-crc32"), etag) {
            (Some(back), Some(etag)) if back == sum => Ok(etag),
            (Some(back), _) if back != sum => Err(S3Error::Checksum(format!("{key}: CRC-32 {back}, sent {sum}"))),
            (Some(_), _) => Err(S3Error::BadAnswer(format!("{key}: stored without an ETag"))),
            (None, _) => {
                self.confirms_crc32.store(false, Ordering::Relaxed);
                warn!(
                    key,
                    "the archive's server did not send back the CRC-32 of what it stored: objects go with their MD5"
                );
                Err(S3Error::Checksum(format!(
                    "{key}: the server did not send back its CRC-32; it goes again with its MD5"
                )))
            }
        }
    }

    /// Reads `key`, or its bytes `range` (first and last, inclusive); at most `max_bytes`.
    pub async fn get(
        &self,
        key: &str,
        range: Option<(u64, u64)>,
        max_bytes: usize,
        now_us: i64,
    ) -> Result<Bytes, S3Error> {
        let mut ask = Ask::new(Method::Get, key);
        if let Some((first, last)) = range {
            ask.headers.push(("range", format!("bytes={first}-{last}")));
        }
        ask.answer_max_bytes = max_bytes;
        let answer = self.send(ask, now_us).await?;
        if let Some((first, last)) = range {
            let want = last.saturating_sub(first) + 1;
            // A server that ignores the range answers 200 with the whole object.
            if answer.status != 206 || answer.body.len() as u64 != want {
                return Err(S3Error::BadAnswer(format!(
                    "{key}: asked for {want} bytes from {first}, got HTTP {} with {}",
                    answer.status,
                    answer.body.len()
                )));
            }
        }
        Ok(answer.body)
    }

    /// `key`'s size and ETag, or none when it is not there.
    pub async fn head(&self, key: &str, now_us: i64) -> Result<Option<(u64, String)>, S3Error> {
        match self.send(Ask::new(Method::Head, key), now_us).await {
            Ok(a) => {
                let size = a.header("content-length").and_then(|l| l.parse().ok()).unwrap_or(0);
                Ok(Some((size, a.etag().unwrap_or("").to_string())))
            }
            Err(e) if e.kind() == Kind::Missing => Ok(None),
            Err(e) => Err(e),
        }
    }

    pub async fn delete(&self, key: &str, now_us: i64) -> Result<(), S3Error> {
        self.send(Ask::new(Method::Delete, key), now_us).await.map(|_| ())
    }

    /// A page of the keys under `prefix` (up to `delimiter`'s next, when given), from `after`
    /// (a page's `next`).
    pub async fn list(
        &self,
        prefix: &str,
        delimiter: Option<&str>,
        after: Option<&str>,
        now_us: i64,
    ) -> Result<Page, S3Error> {
        let mut ask = Ask::new(Method::Get, "");
        ask.query.push(("list-type", "2".into()));
        ask.query.push(("max-keys", limits::ARCHIVE_LIST_KEYS_MAX.to_string()));
        ask.query.push(("prefix", prefix.into()));
        if let Some(d) = delimiter {
            ask.query.push(("delimiter", d.into()));
        }
        if let Some(a) = after {
            ask.query.push(("continuation-token", a.into()));
        }
        let answer = self.send(ask, now_us).await?;
        xml::page(&String::from_utf8_lossy(&answer.body)).map_err(|e| S3Error::BadAnswer(e.0))
    }

    /// Up to `pages` pages of the keys under `prefix`, joined; `next` says where more would
    /// start.
    pub async fn list_pages(
        &self,
        prefix: &str,
        delimiter: Option<&str>,
        pages: usize,
        now_us: &(dyn Fn() -> i64 + Sync),
    ) -> Result<Page, S3Error> {
        let mut all = Page::default();
        for _ in 0..pages {
            let page = self.list(prefix, delimiter, all.next.as_deref(), now_us()).await?;
            all.objects.extend(page.objects);
            all.prefixes.extend(page.prefixes);
            // A server that hands back the token it was given would loop.
            let same = page.next.is_some() && page.next == all.next;
            all.next = page.next;
            if all.next.is_none() || same {
                break;
            }
        }
        Ok(all)
    }

    /// Starts a multipart upload of `key`; its upload id.
    pub async fn start_upload(&self, key: &str, now_us: i64) -> Result<String, S3Error> {
        let mut ask = Ask::new(Method::Post, key);
        ask.query.push(("uploads", String::new()));
        ask.typed();
        let answer = self.send(ask, now_us).await?;
        xml::upload_id(&String::from_utf8_lossy(&answer.body)).map_err(|e| S3Error::BadAnswer(e.0))
    }

    /// Sends part `number` (from 1) of upload `id`; its ETag, checked to be its MD5.
    pub async fn upload_part(
        &self,
        key: &str,
        id: &str,
        number: u16,
        body: Bytes,
        now_us: i64,
    ) -> Result<String, S3Error> {
        let md5 = off_runtime(body.clone(), |b| md5::Md5::digest(b).into()).await;
        self.upload_part_digested(key, id, number, (body, md5), now_us).await
    }

    /// [`Bucket::upload_part`] of a body whose MD5 is known (made while the part before was
    /// sent).
    pub async fn upload_part_digested(
        &self,
        key: &str,
        id: &str,
        number: u16,
        (body, md5): (Bytes, [u8; 16]),
        now_us: i64,
    ) -> Result<String, S3Error> {
        let mut ask = Ask::new(Method::Put, key);
        ask.query.push(("partNumber", number.to_string()));
        ask.query.push(("uploadId", id.into()));
        ask.headers.push(("content-md5", B64.encode(md5)));
        ask.body = body;
        let answer = self.send(ask, now_us).await?;
        let etag = answer.etag().unwrap_or("").to_string();
        if etag != hex(&md5) {
            return Err(S3Error::Checksum(format!("{key} part {number}: ETag {etag}, sent MD5 {}", hex(&md5))));
        }
        Ok(etag)
    }

    /// Puts upload `id` together from `parts` (their ETags, parts 1, 2, …); its ETag, checked
    /// against the parts'.
    pub async fn complete_upload(&self, key: &str, id: &str, parts: &[String], now_us: i64) -> Result<String, S3Error> {
        let mut body = String::from("<CompleteMultipartUpload>");
        for (i, etag) in parts.iter().enumerate() {
            body.push_str(&format!("<Part><PartNumber>{}</PartNumber><ETag>\"{etag}\"</ETag></Part>", i + 1));
        }
        body.push_str("</CompleteMultipartUpload>");
        let mut ask = Ask::new(Method::Post, key);
        ask.query.push(("uploadId", id.into()));
        ask.body = Bytes::from(body);
        let answer = self.send(ask, now_us).await?;
        let etag = match xml::completed(&String::from_utf8_lossy(&answer.body)) {
            Ok(Ok(etag)) => etag.trim_matches('"').to_string(),
            Ok(Err((code, message))) => return Err(S3Error::Refused { status: answer.status, code, message }),
            Err(e) => return Err(S3Error::BadAnswer(e.0)),
        };
        // A server that makes its ETags otherwise (encrypting ones) is not held to this form.
        match multipart_etag(parts) {
            Some(want) if etag.ends_with(&format!("-{}", parts.len())) && etag != want => {
                Err(S3Error::Checksum(format!("{key}: ETag {etag}, its parts make {want}")))
            }
            _ => Ok(etag),
        }
    }

    /// Gives up upload `id`: the server drops its parts.
    pub async fn abort_upload(&self, key: &str, id: &str, now_us: i64) -> Result<(), S3Error> {
        let mut ask = Ask::new(Method::Delete, key);
        ask.query.push(("uploadId", id.into()));
        match self.send(ask, now_us).await {
            Err(e) if e.kind() != Kind::Missing => Err(e),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_server_that_never_answers_is_given_up_on_at_the_request_timeout_and_its_body_time() {
        let bucket = local_bucket(crate::base::testing::silent_peer().await);
        let body = Bytes::from(vec![0; 640 << 10]);
        let started = tokio::time::Instant::now();
        let got = bucket.put("k", body, 1_800_000_000_000_000).await;
        // 640 KiB at the slowest link allowed is 10 s more.
        let want = limits::ARCHIVE_REQUEST_TIMEOUT_MS + 10_000;
        assert_eq!(got, Err(S3Error::Exchange(FetchError::Timeout(want))));
        assert_eq!(started.elapsed(), Duration::from_millis(want));
    }

    /// A file sent whole is read a chunk at a time, at most its ceiling ahead of the
    /// connection, and only the length given.
    #[tokio::test]
    async fn a_file_body_is_read_in_chunks_a_few_ahead_and_only_its_length() {
        use http_body_util::BodyExt as _;
        let chunk = limits::ARCHIVE_STREAM_CHUNK_BYTES;
        let ahead = limits::ARCHIVE_STREAM_CHUNKS_AHEAD;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rec.mp4");
        let bytes: Vec<u8> = (0..(ahead + 3) * chunk + 100).map(|i| (i % 251) as u8).collect();
        std::fs::write(&path, &bytes).unwrap();
        let len = bytes.len() as u64 - 50;
        let mut body = file_chunks(path.clone(), len);
        // Nobody reads: the reader stops at its ceiling.
        let full = async {
            while body.queued() < ahead {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        };
        tokio::time::timeout(Duration::from_secs(10), full).await.expect("chunks read ahead");
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(body.queued(), ahead, "no more than its ceiling read ahead");
        let mut got = Vec::new();
        let mut sizes = Vec::new();
        while let Some(frame) = body.frame().await {
            let data = frame.unwrap().into_data().unwrap();
            sizes.push(data.len());
            got.extend_from_slice(&data);
        }
        assert_eq!(got, &bytes[..len as usize]);
        assert!(sizes.iter().all(|s| *s <= chunk) && sizes[0] == chunk, "{sizes:?}");
        // A file shorter than the length given ends the body with an error.
        let mut short = file_chunks(path, bytes.len() as u64 + 1);
        let mut failed = false;
        while let Some(frame) = short.frame().await {
            failed |= frame.is_err();
        }
        assert!(failed, "a short file is an error, not a short body");
    }

    /// A server that answers each request once with `reply` (after reading its head and
    /// body); its port.
    async fn answering(reply: &'static str) -> u16 {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            loop {
                let (mut s, _) = listener.accept().await.unwrap();
                tokio::spawn(async move {
                    let mut buf = Vec::new();
                    let mut chunk = vec![0u8; 64 << 10];
                    loop {
                        let Ok(n) = s.read(&mut chunk).await else { return };
                        if n == 0 {
                            return;
                        }
                        buf.extend_from_slice(&chunk[..n]);
                        let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else { continue };
                        let head = String::from_utf8_lossy(&buf[..end]).to_lowercase();
                        let len: usize = head
                            .lines()
                            .find_map(|l| l.strip_prefix("content-length:"))
                            .map_or(0, |v| v.trim().parse().unwrap());
                        if buf.len() >= end + 4 + len {
                            buf.drain(..end + 4 + len);
                            if s.write_all(reply.as_bytes()).await.is_err() {
                                return;
                            }
                        }
                    }
                });
            }
        });
        port
    }

    fn local_bucket(port: u16) -> Bucket {
        Bucket::new(Place {
            endpoint: url::Url::parse(&format!("http://127.0.0.1:{port}")).unwrap(),
            region: "us-east-1".into(),
            bucket: "nvr".into(),
            path_style: true,
            access_key: "a".into(),
            secret_key: "s".into(),
            ca_pem: None,
        })
        .unwrap()
    }

    /// A server that stores a file sent with its CRC-32 without sending it back has not
    /// confirmed it: a checksum error, and the box sends it objects with their MD5 from then
    /// on. One that sends back another is a checksum error too.
    #[tokio::test]
    async fn a_crc32_not_sent_back_or_not_the_one_sent_is_a_checksum_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rec.mp4");
        std::fs::write(&path, vec![7u8; 300_000]).unwrap();
        let crc32 = crc32fast::hash(&[7u8; 300_000]);
        let now = 1_800_000_000_000_000;
        let silent = local_bucket(answering("HTTP/1.1 200 OK\r\netag: \"ab\"\r\ncontent-length: 0\r\n\r\n").await);
        let got = silent.put_file("k.mp4", (path.clone(), 300_000), crc32, now).await;
        assert!(matches!(&got, Err(S3Error::Checksum(m)) if m.contains("did not send back")), "{got:?}");
        assert!(!silent.confirms_crc32());
        let other = "HTTP/1.1 200 OK\r\netag: \"ab\"\r\nx-amz-checksum-crc32: AAAAAA==\r\ncontent-length: 0\r\n\r\n";
        let other = local_bucket(answering(other).await);
        let got = other.put_file("k.mp4", (path, 300_000), crc32, now).await;
        assert!(matches!(&got, Err(S3Error::Checksum(m)) if m.contains("CRC-32 AAAAAA==")), "{got:?}");
        assert!(other.confirms_crc32());
    }

    #[test]
    fn a_multipart_etag_is_the_md5_of_its_parts_md5s() {
        let parts = [md5_hex(b"one"), md5_hex(b"two")];
        let mut both = md5::Md5::digest(b"one").to_vec();
        both.extend(md5::Md5::digest(b"two"));
        assert_eq!(multipart_etag(&parts).unwrap(), format!("{}-2", md5_hex(&both)));
        assert_eq!(multipart_etag(&["\"nothex\"".to_string()]), None);
    }

    #[test]
    fn failures_say_what_the_box_does_next() {
        let refused = |status: u16, code: &str| S3Error::Refused { status, code: code.into(), message: String::new() };
        assert_eq!(refused(403, "SignatureDoesNotMatch").kind(), Kind::Credentials);
        assert_eq!(refused(503, "SlowDown").kind(), Kind::Later);
        assert_eq!(refused(500, "").kind(), Kind::Later);
        assert_eq!(refused(403, "QuotaExceeded").kind(), Kind::Full);
        assert_eq!(refused(404, "NoSuchUpload").kind(), Kind::Missing);
        assert_eq!(refused(404, "NoSuchBucket").kind(), Kind::Refused);
        assert_eq!(refused(400, "InvalidArgument").kind(), Kind::Refused);
        assert_eq!(S3Error::Clock { off_s: 3600 }.kind(), Kind::Clock);
        assert_eq!(S3Error::from(FetchError::Timeout(1)).kind(), Kind::Later);
    }
}

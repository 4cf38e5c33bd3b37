//! How every handler answers and reads its body: replies (JSON, text, errors with a stable
//! code), and request bodies read within their ceiling and the socket guard's clock.
//!
//! Handlers build replies here and nowhere else; a room's error becomes a reply through
//! [`super::errors`].

use std::sync::atomic::Ordering;

use bytes::Bytes;
use http::{HeaderMap, Response, StatusCode, header};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use serde::Deserialize;

use super::Ctx;
use crate::limits;

/// Response bodies: whole (`full`) or streamed from disk (export).
pub(crate) type Body = http_body_util::combinators::UnsyncBoxBody<Bytes, std::io::Error>;
pub(crate) type Reply = Response<Body>;

/// A request's body: read whole before the handler slot was taken (`Left`: every route whose
/// body is small), or still on the wire (`Right`: offers, event uploads and update bundles,
/// read by their handlers once the credential was checked).
pub(crate) type RequestBody = http_body_util::Either<Full<Bytes>, Incoming>;

pub(crate) fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into()).map_err(|never| match never {}).boxed_unsync()
}

/// A reply of `status` with `body` of `content_type`.
pub(crate) fn with_type(status: StatusCode, body: impl Into<Bytes>, content_type: &'static str) -> Reply {
    let mut r = Response::new(full(body));
    *r.status_mut() = status;
    r.headers_mut().insert(header::CONTENT_TYPE, header::HeaderValue::from_static(content_type));
    r
}

/// A JSON error body with a stable code.
pub(crate) fn error(status: StatusCode, code: &str, message: &str) -> Reply {
    let body = serde_json::json!({ "code": code, "message": message }).to_string();
    with_type(status, body, "application/json")
}

/// A JSON error body that names the request's field it is about.
pub(crate) fn error_on(status: StatusCode, code: &str, message: &str, field: &str) -> Reply {
    let body = serde_json::json!({ "code": code, "message": message, "field": field }).to_string();
    with_type(status, body, "application/json")
}

pub(crate) fn json(status: StatusCode, value: serde_json::Value) -> Reply {
    with_type(status, value.to_string(), "application/json")
}

pub(crate) fn text(body: String, content_type: &'static str) -> Reply {
    with_type(StatusCode::OK, body, content_type)
}

/// `reply` with a header whose value is made at run time (dropped if it is not a valid value).
pub(crate) fn with_header(mut reply: Reply, name: header::HeaderName, value: &str) -> Reply {
    if let Ok(v) = header::HeaderValue::from_str(value) {
        reply.headers_mut().insert(name, v);
    }
    reply
}

/// Runs `work` (a catalog read, a file read) on the blocking pool, never on the runtime's
/// threads; a task that panicked is a 500.
pub(crate) async fn on_pool<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, Reply> + Send + 'static,
) -> Result<T, Reply> {
    match tokio::task::spawn_blocking(work).await {
        Ok(r) => r,
        Err(e) => Err(error(StatusCode::INTERNAL_SERVER_ERROR, "internal", &e.to_string())),
    }
}

/// `reply` with `connection: close`.
pub(crate) fn closing(mut reply: Reply) -> Reply {
    reply.headers_mut().insert(header::CONNECTION, header::HeaderValue::from_static("close"));
    reply
}

/// The host a request names, without its port (an IPv6 literal keeps its brackets); none
/// when it names none or the name is not a host.
pub(crate) fn request_host(headers: &HeaderMap) -> Option<&str> {
    let host = headers.get(header::HOST)?.to_str().ok()?;
    let bare = match host.strip_prefix('[') {
        Some(rest) => &host[..rest.find(']')? + 2],
        None => host.rsplit_once(':').filter(|(_, p)| p.bytes().all(|b| b.is_ascii_digit())).map_or(host, |(h, _)| h),
    };
    (!bare.is_empty()).then_some(bare)
}

/// A plain HTTP request sent on to the same path on the HTTPS port: `307` (the method and
/// body are kept, and nothing is cached, so turning HTTPS off later strands no browser), to
/// the host the request named, else the address it came in on.
pub(crate) fn to_https(headers: &HeaderMap, uri: &http::Uri, https_port: u16, local: std::net::SocketAddr) -> Reply {
    let host = match request_host(headers) {
        Some(h) => h.to_string(),
        None if local.is_ipv6() => format!("[{}]", local.ip()),
        None => local.ip().to_string(),
    };
    // The host came from the client: it must be a host and nothing more (no path, query or
    // user), so the redirect goes to this box's HTTPS port and nowhere else.
    if url::Host::parse(&host).is_err() {
        return error(StatusCode::BAD_REQUEST, "bad_host", "the request's host is not a host name or address");
    }
    let port = if https_port == 443 { String::new() } else { format!(":{https_port}") };
    let path = uri.path_and_query().map_or("/", |p| p.as_str());
    let location = format!("https://{host}{port}{path}");
    let mut r = error(StatusCode::TEMPORARY_REDIRECT, "https", "this box answers over HTTPS");
    r.headers_mut().insert(header::CACHE_CONTROL, header::HeaderValue::from_static("no-store"));
    with_header(r, header::LOCATION, &location)
}

/// Reads a body of at most `max` bytes: 413 past it, 408 when it did not arrive in time (the
/// socket guard leaves that answer to the handler reading the body), 400 when it broke off.
pub(crate) async fn read_body(body: RequestBody, ctx: &Ctx, max: usize) -> Result<Bytes, Reply> {
    match Limited::new(body, max).collect().await {
        Ok(b) => Ok(b.to_bytes()),
        Err(e) if e.downcast_ref::<http_body_util::LengthLimitError>().is_some() => {
            ctx.stats.body_too_large.fetch_add(1, Ordering::Relaxed);
            let message = format!("the request body is over {} KiB", max >> 10);
            Err(error(StatusCode::PAYLOAD_TOO_LARGE, "body_too_large", &message))
        }
        Err(e) if timed_out(&*e) => Err(request_timeout()),
        Err(_) => Err(error(StatusCode::BAD_REQUEST, "bad_body", "the request body could not be read")),
    }
}

/// True when `e`, or an error under it, is the socket guard's read deadline.
pub(crate) fn timed_out(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut at = Some(e);
    while let Some(e) = at {
        if e.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::TimedOut) {
            return true;
        }
        at = e.source();
    }
    false
}

/// The `408` for a body that did not arrive in time; the connection ends with it.
pub(crate) fn request_timeout() -> Reply {
    closing(error(StatusCode::REQUEST_TIMEOUT, "request_timeout", "the request body did not arrive in time"))
}

/// The request's `content-type`, or nothing.
/// The body length the head declares, if it declares a readable one.
pub(crate) fn declared_length(headers: &HeaderMap) -> Option<u64> {
    headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<u64>().ok())
}

pub(crate) fn content_type(headers: &HeaderMap) -> &str {
    headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("")
}

/// Reads a small JSON body: 415 unless it is declared `application/json` (so that no page
/// elsewhere can post it as a "simple" form or text request), 413 past
/// [`limits::HTTP_SMALL_BODY_MAX_BYTES`], 400 if it is not the expected JSON.
pub(crate) async fn read_json<T: for<'de> Deserialize<'de>>(
    headers: &HeaderMap,
    body: RequestBody,
    ctx: &Ctx,
) -> Result<T, Reply> {
    read_json_max(headers, body, ctx, limits::HTTP_SMALL_BODY_MAX_BYTES as usize).await
}

/// [`read_json`] for a route whose body may be up to `max` bytes.
pub(crate) async fn read_json_max<T: for<'de> Deserialize<'de>>(
    headers: &HeaderMap,
    body: RequestBody,
    ctx: &Ctx,
    max: usize,
) -> Result<T, Reply> {
    if !super::parse::is_mime(content_type(headers), "application/json") {
        return Err(error(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "not_json",
            "send the body as content-type: application/json",
        ));
    }
    let bytes = read_body(body, ctx, max).await?;
    serde_json::from_slice(&bytes).map_err(|e| error(StatusCode::BAD_REQUEST, "bad_json", &e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(host: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::HOST, header::HeaderValue::from_str(host).unwrap());
        h
    }

    #[test]
    fn plain_http_is_sent_on_to_the_same_host_and_path_over_https() {
        let local: std::net::SocketAddr = "192.168.1.20:8080".parse().unwrap();
        let to = |host: Option<&str>, path: &str, port| {
            let h = host.map(headers).unwrap_or_default();
            let r = to_https(&h, &path.parse().unwrap(), port, local);
            (r.status().as_u16(), r.headers().get(header::LOCATION).map(|v| v.to_str().unwrap().to_string()))
        };
        assert_eq!(to(Some("nvr.local:8080"), "/a?b=1", 8443), (307, Some("https://nvr.local:8443/a?b=1".into())));
        assert_eq!(to(Some("nvr.local"), "/", 443), (307, Some("https://nvr.local/".into())));
        assert_eq!(to(Some("[fd00::20]:8080"), "/", 8443), (307, Some("https://[fd00::20]:8443/".into())));
        assert_eq!(to(None, "/x", 8443), (307, Some("https://192.168.1.20:8443/x".into())));
        for bad in ["evil.example/x?", "a b", "user@evil.example", "evil.example#"] {
            assert_eq!(to(Some(bad), "/", 8443).0, 400, "{bad}");
        }
        assert_eq!(to(Some("[fd00::20"), "/", 8443), (307, Some("https://192.168.1.20:8443/".into())));
        assert_eq!(request_host(&headers("nvr:notaport")), Some("nvr:notaport"));
    }
}

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
    if !super::parse::is_mime(content_type(headers), "application/json") {
        return Err(error(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "not_json",
            "send the body as content-type: application/json",
        ));
    }
    let bytes = read_body(body, ctx, limits::HTTP_SMALL_BODY_MAX_BYTES as usize).await?;
    serde_json::from_slice(&bytes).map_err(|e| error(StatusCode::BAD_REQUEST, "bad_json", &e.to_string()))
}
